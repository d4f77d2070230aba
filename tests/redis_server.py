"""A real redis-server for integration tests: started, SIGKILLed, restarted.

    server = RedisServer(tmp_path)      # a free loopback port, data in tmp_path
    server.start()                      # returns once it answers PING
    server.kill()                       # SIGKILL: no shutdown, no final save
    server.start()                      # same port, same dir: reloads the AOF
    server.stop()

Durability is what the tests rely on: `appendonly yes` with
`appendfsync always` makes redis-server write and fsync every write to the
append-only file before it replies, so an acknowledged write survives a
SIGKILL.  No RDB snapshots (`save ""`), so the AOF alone is the data.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ping(port: int, timeout: float) -> bool:
    """True when a server on `port` answers PING (not -LOADING) with +PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None):
        if REDIS_SERVER is None:
            raise RuntimeError(
                "redis-server is not installed (Debian: apt-get install redis-server)"
            )
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    def command(self) -> list[str]:
        return [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--enable-debug-command", "local",  # DEBUG SLEEP holds it busy
            "--logfile", str(self.log),
        ]  # fmt: skip

    def start(self, timeout: float = 10.0) -> None:
        """Start (or restart) the server and wait until it serves commands."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("redis-server is already running")
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not _ping(self.port, timeout=0.5):
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.tail_log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not answer in {timeout}s: {self.tail_log()}")
            time.sleep(0.005)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, without saving anything more."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Stop the server for good (SIGTERM, then SIGKILL if it lingers)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail_log(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"
