"""Real Redis topologies on loopback for the failover tests: a 6-node
cluster (3 masters, 3 replicas) and a Sentinel setup (1 master, 1 replica,
3 sentinels), built from Debian's redis-server and redis-cli.

    with RedisCluster.started(tmp_path) as cluster:   # healthy on return
        master = cluster.masters()[0]
        cluster.kill(master)                          # SIGKILL
        cluster.wait_failover(master)                 # its replica promoted
        cluster.restart(master)                       # rejoins as a replica
        cluster.wait_healthy()

Every process is started in a temporary directory, listens on 127.0.0.1
only, on free ports (or ports given), and is killed when the `with` block
ends, however it ends; an atexit hook and PR_SET_PDEATHSIG (the server
dies with the thread that started it) catch an interpreter that does not
get there.  Start servers from the main thread only, for that reason.

Durability: every data node runs `appendonly yes`, `appendfsync always`.
On loopback a master writes a command's replication stream to its
replicas before it writes the reply to the client (both are pending
writes of one event-loop turn, replicas queued last and served first), so
an INCR whose reply a client read is in its replica's socket buffer when
the master is SIGKILLed, and the promoted replica has it.

This module is also a command-line tool for the redis-py suite stage
(.ci/redis-py-suite.sh):

    python topology.py cluster --ports 16379-16384 --dir DIR

starts a cluster, prints "ready", and stops it on SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HOST = "127.0.0.1"
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")

# Failure detection on loopback: a node is marked failing after this many
# milliseconds without an answer; a replica starts its election right after.
# Shorter than this, a loaded machine (a CI runner, or two cores shared by
# several jobs) makes a busy master look dead: a spurious failover, and
# then a real loss of acknowledged writes (replication is asynchronous).
CLUSTER_NODE_TIMEOUT_MS = 1000
SENTINEL_DOWN_AFTER_MS = 1000

# Data and logs in memory when the machine has /dev/shm: an fsync on every
# write (appendfsync always) then costs nothing, so no disk stall makes a
# master miss its heartbeats.  (A SIGKILL loses nothing the page cache
# holds either way.)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
SENTINEL_SERVICE = "mymaster"

_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        processes = list(_LIVE)
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


atexit.register(_kill_leftovers)


# The server gets SIGKILL when the thread that started it ends (Linux
# prctl PR_SET_PDEATHSIG), so a killed pytest leaves nothing: set by
# util-linux's setpriv, which then execs the server.  Not by a preexec_fn:
# Python code run between fork and exec can deadlock on a lock another
# thread held at the fork (it did, under AddressSanitizer's allocator).
_DIE_WITH_PARENT = (
    [shutil.which("setpriv"), "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
)


def _need_binaries() -> None:
    if REDIS_SERVER is None or REDIS_CLI is None:
        raise RuntimeError(
            "redis-server and redis-cli are needed (Debian: apt-get install redis-server)"
        )


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on now
    (all held open together while choosing, so they differ)."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind((HOST, 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


class CommandError(RuntimeError):
    pass


def command(port: int, *args: str, timeout: float = 1.0) -> object:
    """One command on a fresh connection, RESP2, decoded.  A minimal client
    of our own, so that the fixtures never depend on the retry machinery
    under test (nor on whether redis-py is patched)."""
    return commands(port, args, timeout=timeout)[0]


def commands(port: int, *each: tuple[str, ...], timeout: float = 3.0) -> list[object]:
    """Several commands, in order, on one fresh connection (WAIT counts the
    writes of its own connection); an error reply raises CommandError."""
    with socket.create_connection((HOST, port), timeout=timeout) as conn:
        reader = conn.makefile("rb")
        replies = []
        for args in each:
            parts = [f"*{len(args)}\r\n".encode()]
            for arg in args:
                data = arg.encode()
                parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
            conn.sendall(b"".join(parts))
            replies.append(_read_reply(reader))
        return replies


def _read_reply(reader: object) -> object:
    line = reader.readline()  # type: ignore[attr-defined]
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise CommandError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        length = int(rest)
        if length < 0:
            return None
        data = reader.read(length + 2)  # type: ignore[attr-defined]
        return data[:-2].decode()
    if kind == b"*":
        length = int(rest)
        return None if length < 0 else [_read_reply(reader) for _ in range(length)]
    raise ConnectionError(f"unexpected reply {line!r}")


def answers(port: int) -> bool:
    try:
        return command(port, "PING", timeout=0.5) == "PONG"
    except (OSError, CommandError):
        return False


def info(port: int, section: str) -> dict[str, str]:
    text = command(port, "INFO", section)
    assert isinstance(text, str)
    fields = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            fields[key] = value
    return fields


def cluster_info(port: int) -> dict[str, str]:
    text = command(port, "CLUSTER", "INFO")
    assert isinstance(text, str)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def wait_until(what: str, condition: object, timeout: float, interval: float = 0.02) -> None:
    """Poll `condition()` until it is true; AssertionError naming `what`
    after `timeout` seconds.  Errors from a node going away count as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except (OSError, CommandError, KeyError, ValueError) as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


class Node:
    """One redis-server process (data node or sentinel) with its own
    directory and config file; start() waits until it answers PING."""

    def __init__(self, directory: Path, port: int, config: list[str], sentinel: bool = False):
        self.directory = directory
        self.port = port
        self.config = config
        self.sentinel = sentinel
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    def start(self, timeout: float = 10.0) -> None:
        _need_binaries()
        if self.running:
            raise RuntimeError(f"{self.address} is already running")
        conf = self.directory / ("sentinel.conf" if self.sentinel else "redis.conf")
        if not (self.sentinel and conf.exists()):  # a sentinel rewrites its own
            conf.write_text("\n".join(self.config) + "\n")
        argv = [REDIS_SERVER, str(conf)] + (["--sentinel"] if self.sentinel else [])
        self.process = subprocess.Popen(
            _DIE_WITH_PARENT + argv,
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with _LIVE_LOCK:
            _LIVE.add(self.process)
        deadline = time.monotonic() + timeout
        while not answers(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.address} exited: {self.tail_log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.address} did not answer in {timeout}s")
            time.sleep(0.01)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, at once: no shutdown, no final save."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self.process)

    def tail_log(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _scratch_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix=f"redis-backoff-c-{kind}-", dir=SCRATCH)


def replica_caught_up(master_port: int, key: str = "topology:healthy") -> bool:
    """The master's one replica applies the replication stream now: a
    write on the master, then WAIT for one replica to acknowledge it.
    INFO's state=online is not enough: after a diskless full sync the
    master may hold the stream back (seen on 7.0 with the replica online
    and acknowledging offsets), and a master killed then takes the writes
    it buffered with it.  `key` must belong to this master (cluster)."""
    replication = info(master_port, "replication")
    if replication.get("role") != "master" or replication.get("connected_slaves") != "1":
        return False
    _, acked = commands(master_port, ("SET", key, str(time.monotonic_ns())), ("WAIT", "1", "500"))
    return acked == 1


def dump_logs(nodes: list[Node]) -> None:
    """The end of every node's log, to stderr: how the servers saw it."""
    for node in nodes:
        print(f"--- {node.address} {node.log}\n{node.tail_log(60)}", file=sys.stderr)


@contextlib.contextmanager
def _logs_on_error(nodes: list[Node]) -> Iterator[None]:
    """On an error while starting (or in the `with` body), dump_logs()
    before the directory goes."""
    try:
        yield
    except BaseException:
        dump_logs(nodes)
        raise


def _data_config(directory: Path, port: int) -> list[str]:
    return [
        f"port {port}",
        f"bind {HOST}",
        "protected-mode no",
        f"dir {directory}",
        f"logfile {directory / 'redis.log'}",
        "daemonize no",
        "appendonly yes",
        "appendfsync always",
        'save ""',
        # A replica syncs at once, over the socket, instead of waiting 5 s
        # for more replicas to share one transfer.
        "repl-diskless-sync yes",
        "repl-diskless-sync-delay 0",
        # DEBUG SLEEP from loopback: a node held busy on cue (a slow server,
        # tests/integration/test_at_most_once_cluster.py).
        "enable-debug-command local",
    ]


class RedisCluster:
    """3 masters and 3 replicas, created by `redis-cli --cluster create`."""

    def __init__(self, directory: Path, ports: list[int] | None = None):
        self.directory = Path(directory)
        self.ports = list(ports) if ports is not None else free_ports(6)
        if len(self.ports) != 6:
            raise ValueError("a cluster here has 6 nodes")
        bus_ports = free_ports(6)
        self.nodes = []
        for port, bus in zip(self.ports, bus_ports):
            node_dir = self.directory / f"node-{port}"
            config = _data_config(node_dir, port) + [
                "cluster-enabled yes",
                f"cluster-port {bus}",
                "cluster-config-file nodes.conf",
                f"cluster-node-timeout {CLUSTER_NODE_TIMEOUT_MS}",
                # A replica of a master killed mid-stream may always take over.
                "cluster-replica-validity-factor 0",
                # Replicas stay where redis-cli put them.
                "cluster-allow-replica-migration no",
            ]
            self.nodes.append(Node(node_dir, port, config))

    @classmethod
    @contextlib.contextmanager
    def started(
        cls, directory: Path | None = None, ports: list[int] | None = None
    ) -> Iterator[RedisCluster]:
        with contextlib.ExitStack() as stack:
            if directory is None:
                directory = Path(stack.enter_context(_scratch_dir("cluster")))
            cluster = cls(directory, ports)
            stack.callback(cluster.stop)
            with _logs_on_error(cluster.nodes):
                cluster.start()
                yield cluster

    def node(self, port: int) -> Node:
        return next(node for node in self.nodes if node.port == port)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        argv = [REDIS_CLI, "--cluster", "create"]
        argv += [node.address for node in self.nodes]
        argv += ["--cluster-replicas", "1", "--cluster-yes"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode != 0 or "[OK] All 16384 slots covered" not in done.stdout:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")
        self.wait_healthy()

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    def view(self, port: int) -> dict[str, tuple[str, str, str | None]]:
        """Node `port`'s CLUSTER NODES: id -> (address, role, master id),
        live nodes only as this node sees them."""
        text = command(port, "CLUSTER", "NODES")
        assert isinstance(text, str)
        nodes = {}
        for line in text.splitlines():
            fields = line.split()
            node_id, address, flags, master = fields[0], fields[1], fields[2], fields[3]
            role = "master" if "master" in flags.split(",") else "replica"
            if "fail" in flags.split(",") or "fail?" in flags.split(","):
                role = "failing"
            nodes[node_id] = (address.split("@")[0], role, None if master == "-" else master)
        return nodes

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.running]

    def _agreed(self) -> bool:
        live = self.live()
        views = [self.view(node.port) for node in live]
        if any(view != views[0] for view in views[1:]):
            return False
        view = views[0]
        if len(view) != 6 or any(role == "failing" for _, role, _ in view.values()):
            return False
        for node in live:
            state = cluster_info(node.port)
            if state["cluster_state"] != "ok" or state["cluster_slots_ok"] != "16384":
                return False
            if state["cluster_known_nodes"] != "6":
                return False
        return True

    def _replicas_in_sync(self) -> bool:
        masters = self.masters()
        if len(masters) != 3:
            return False
        for master in masters:
            if not replica_caught_up(master.port, self._key_on(master)):
                return False
            replica = self.replica_of(master)
            state = info(replica.port, "replication")
            if state.get("master_link_status") != "up":
                return False
            if state.get("master_sync_in_progress") != "0":
                return False
        return True

    def _key_on(self, master: Node) -> str:
        """A key in one of `master`'s slots (the first that is not MOVED)."""
        for n in range(1000):
            key = f"topology:healthy:{n}"
            try:
                command(master.port, "EXISTS", key)
            except CommandError as error:
                if str(error).startswith("MOVED"):
                    continue
                raise
            return key
        raise KeyError(f"no key found on {master.address}")

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Every node agrees on the same 6 nodes and roles, every slot is
        served, every master has one replica, online and synced."""
        wait_until("the cluster to agree", self._agreed, timeout)
        wait_until("every replica to be in sync", self._replicas_in_sync, timeout)

    def _roles(self) -> dict[str, tuple[str, str, str | None]]:
        return self.view(self.live()[0].port)

    def masters(self) -> list[Node]:
        view = self._roles()
        addresses = {address for address, role, _ in view.values() if role == "master"}
        return [node for node in self.nodes if node.address in addresses and node.running]

    def replica_of(self, master: Node) -> Node:
        view = self._roles()
        ids = {address: node_id for node_id, (address, _, _) in view.items()}
        master_id = ids[master.address]
        for address, role, of in view.values():
            if role == "replica" and of == master_id:
                return next(node for node in self.nodes if node.address == address)
        raise KeyError(f"no replica of {master.address}")

    def kill(self, node: Node) -> None:
        node.kill()

    def wait_failover(self, replica: Node, timeout: float = 15.0) -> None:
        """Wait until every live node sees `replica` as a master and the
        cluster serves every slot again."""

        def promoted() -> bool:
            for node in self.live():
                view = self.view(node.port)
                if not any(a == replica.address and r == "master" for a, r, _ in view.values()):
                    return False
                if cluster_info(node.port)["cluster_state"] != "ok":
                    return False
            return True

        wait_until(f"{replica.address} to be promoted", promoted, timeout)

    def restart(self, node: Node) -> None:
        """Start a killed node again: it reloads its nodes.conf and AOF and
        rejoins, as a replica of the node that took over its slots."""
        node.start()


class RedisSentinel:
    """One master, one replica, three sentinels (quorum 2) watching them
    under the service name SENTINEL_SERVICE."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        master_port, replica_port, *sentinel_ports = free_ports(5)
        self.data = []
        for port in (master_port, replica_port):
            node_dir = self.directory / f"node-{port}"
            self.data.append(Node(node_dir, port, _data_config(node_dir, port)))
        self.data[1].config.append(f"replicaof {HOST} {master_port}")
        self._base_config = {node.port: list(node.config[:-1]) for node in self.data}
        self._base_config[master_port] = list(self.data[0].config)
        self.sentinels = []
        for port in sentinel_ports:
            sentinel_dir = self.directory / f"sentinel-{port}"
            config = [
                f"port {port}",
                f"bind {HOST}",
                "protected-mode no",
                f"dir {sentinel_dir}",
                f"logfile {sentinel_dir / 'redis.log'}",
                "daemonize no",
                f"sentinel monitor {SENTINEL_SERVICE} {HOST} {master_port} 2",
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {SENTINEL_DOWN_AFTER_MS}",
                f"sentinel failover-timeout {SENTINEL_SERVICE} 1500",
                f"sentinel parallel-syncs {SENTINEL_SERVICE} 1",
            ]
            self.sentinels.append(Node(sentinel_dir, port, config, sentinel=True))

    @classmethod
    @contextlib.contextmanager
    def started(cls, directory: Path | None = None) -> Iterator[RedisSentinel]:
        with contextlib.ExitStack() as stack:
            if directory is None:
                directory = Path(stack.enter_context(_scratch_dir("sentinel")))
            setup = cls(directory)
            stack.callback(setup.stop)
            with _logs_on_error(setup.data + setup.sentinels):
                setup.start()
                yield setup

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(HOST, node.port) for node in self.sentinels]

    def start(self) -> None:
        for node in self.data + self.sentinels:
            node.start()
        self.wait_healthy()

    def stop(self) -> None:
        for node in self.sentinels + self.data:
            node.kill()

    def master(self) -> Node:
        """The data node that every sentinel names as the master."""
        answers = {
            tuple(command(s.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE))  # type: ignore[arg-type]
            for s in self.sentinels
        }
        if len(answers) != 1:
            raise KeyError(f"sentinels disagree: {answers}")
        ((host, port),) = answers
        return next(node for node in self.data if node.port == int(port))

    def replica(self) -> Node:
        master = self.master()
        return next(node for node in self.data if node is not master)

    def _healthy(self) -> bool:
        master = self.master()
        replica = self.replica()
        if not (master.running and replica.running):
            return False
        if info(master.port, "replication").get("role") != "master":
            return False
        state = info(replica.port, "replication")
        if state.get("master_port") != str(master.port) or state.get("master_link_status") != "up":
            return False
        if state.get("master_sync_in_progress") != "0":
            return False
        if not replica_caught_up(master.port):
            return False
        for sentinel in self.sentinels:
            fields = command(sentinel.port, "SENTINEL", "MASTER", SENTINEL_SERVICE)
            assert isinstance(fields, list)
            status = dict(zip(fields[::2], fields[1::2]))
            if status["flags"] != "master" or status["num-other-sentinels"] != "2":
                return False
            replicas = command(sentinel.port, "SENTINEL", "REPLICAS", SENTINEL_SERVICE)
            assert isinstance(replicas, list)
            live = [
                dict(zip(r[::2], r[1::2]))
                for r in replicas
                if isinstance(r, list)
            ]  # fmt: skip
            # The sentinel's own view of the replica's link refreshes every
            # 10 s; the replica's INFO above is the fresh word on that.
            if not any(r["port"] == str(replica.port) and r["flags"] == "slave" for r in live):
                return False
        return True

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """The sentinels agree on one master, know each other and the
        replica, which is online and synced."""
        wait_until("the sentinel setup to be healthy", self._healthy, timeout, interval=0.05)

    def restart_as_replica(self, node: Node) -> None:
        """Start a killed data node again as a replica of the current
        master, as an operator would: left to itself a sentinel takes
        10 to 20 s to notice the old master and convert it."""
        master = self.master()
        node.config = self._base_config[node.port] + [f"replicaof {HOST} {master.port}"]
        node.start()

    def wait_failover(self, old_master: Node, timeout: float = 20.0) -> None:
        """Wait until every sentinel names another node as the master and
        that node says it is one."""

        def switched() -> bool:
            master = self.master()
            if master is old_master or info(master.port, "replication")["role"] != "master":
                return False
            # The failover is over on every sentinel (no failover_in_progress,
            # no s_down), under one configuration epoch: a sentinel that has
            # not heard of it yet would otherwise take a restarted old master
            # back as the master.
            epochs = set()
            for sentinel in self.sentinels:
                fields = command(sentinel.port, "SENTINEL", "MASTER", SENTINEL_SERVICE)
                assert isinstance(fields, list)
                status = dict(zip(fields[::2], fields[1::2]))
                if status["flags"] != "master" or status["port"] != str(master.port):
                    return False
                epochs.add(status["config-epoch"])
            return len(epochs) == 1

        wait_until("the sentinels to fail over", switched, timeout, interval=0.05)


def _main(argv: list[str]) -> int:
    """python topology.py cluster --ports A-B [--dir DIR]: start a cluster,
    print "ready", stop it on SIGTERM or SIGINT."""
    import argparse

    parser = argparse.ArgumentParser(description=_main.__doc__)
    parser.add_argument("kind", choices=["cluster"])
    parser.add_argument("--ports", required=True, help="first-last, six ports")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    first, last = (int(p) for p in args.ports.split("-"))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with RedisCluster.started(args.dir, list(range(first, last + 1))):
        print("ready", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
