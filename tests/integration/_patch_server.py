"""A throwaway redis-server for the patch() integration tests.

Started on a free loopback port, in a temporary directory, with persistence
off (``--save '' --appendonly no``); stopped (terminated, then killed) at the
end. Needs the ``redis-server`` executable (Debian: ``apt-get install
redis-server``; scripts/test.sh installs it); without it the tests fail with
that message, they never skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``with RedisServer() as server:`` ... ``server.port`` ..."""

    host = "127.0.0.1"

    def __init__(self) -> None:
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    def start(self, attempts: int = 3) -> RedisServer:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError(
                "redis-server is not installed: on Debian, apt-get install redis-server "
                "(scripts/test.sh does it)"
            )
        self._directory = tempfile.TemporaryDirectory(prefix="rbc-patch-redis-")
        for _ in range(attempts):
            self.port = _free_port()
            self._process = subprocess.Popen(
                [
                    executable,
                    "--port", str(self.port),
                    "--bind", self.host,
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", self._directory.name,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self._process.poll() is None:
                if _answers_ping(self.port):
                    return self
                time.sleep(0.05)
            self._stop_process()  # the port was taken meanwhile, or it died: again
        self.stop()
        raise RuntimeError(f"redis-server did not start after {attempts} attempts")

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self) -> None:
        self._stop_process()
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
