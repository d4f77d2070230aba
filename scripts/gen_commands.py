"""Writes redis_backoff_c/_commands.py, the command table of the at-most-once
retry policy, from what a real redis-server says about its commands.

    python3 scripts/gen_commands.py [--redis-server PATH] [--output PATH]
    python3 scripts/gen_commands.py --port PORT [--output PATH]

By default it starts a throwaway redis-server (the one on PATH, or PATH),
on a free loopback port, with no persistence (``--save "" --appendonly no``)
in a temporary directory, and stops it when done.  With ``--port`` it asks an
already-running server on 127.0.0.1 instead (one in another root, say) and
leaves that server alone.

It sends ``INFO server`` (for the version) and ``COMMAND`` over a plain
socket (RESP2, no redis-py needed) and writes a module with:

- ``REDIS_VERSION``: the server's ``redis_version``;
- ``READ_ONLY``: every command whose flags include ``readonly``;
- ``KNOWN``: every command the server reported;
- ``CONTAINERS``: the commands that have subcommands.

Names are upper-case; a subcommand (Redis 7 and later report them nested in
their container's entry, named ``config|get``) is spelled ``"CONFIG|GET"``.
The output is sorted, one name per line, and left as ``ruff format`` would
write it, so that two runs against the same server give the same file.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "redis_backoff_c" / "_commands.py"
# What is written between double quotes as it is: no quote, no backslash.
SAFE_NAME = re.compile(r"[A-Z0-9_.:|-]+")
SAFE_VERSION = re.compile(r"[0-9A-Za-z_.+-]+")

# A reply, as read_reply() gives it: str (status), int, bytes or None
# (bulk), list (array), or a RespError instance (error reply).
Reply = object


class RespError(Exception):
    """An error reply from the server."""


def read_reply(stream: BinaryIO) -> Reply:
    """One RESP2 reply, read from `stream` (a socket's makefile("rb"))."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("the server closed the connection mid-reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        return RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        length = int(body)
        if length < 0:
            return None
        data = stream.read(length + 2)
        if len(data) != length + 2:
            raise ConnectionError("the server closed the connection mid-reply")
        return data[:-2]
    if kind == b"*":
        count = int(body)
        if count < 0:
            return None
        return [read_reply(stream) for _ in range(count)]
    raise ValueError(f"not a RESP2 reply: {line!r}")


def encode(*args: str) -> bytes:
    """A command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def text(value: Reply) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise ValueError(f"expected a string in the COMMAND reply, got {value!r}")


class Client:
    """One connection to a server on 127.0.0.1."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.stream = self.sock.makefile("rb")

    def call(self, *args: str) -> Reply:
        self.sock.sendall(encode(*args))
        reply = read_reply(self.stream)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def server_version(client: Client) -> str:
    info = text(client.call("INFO", "server"))
    for line in info.splitlines():
        if line.startswith("redis_version:"):
            return line.partition(":")[2].strip()
    raise ValueError("INFO server has no redis_version")


def command_table(entries: Reply) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """The COMMAND reply as {NAME: flags} (subcommands included, as
    "CONTAINER|SUB") and the names of the containers.

    An entry is [name, arity, flags, first key, last key, step, ...]; from
    Redis 7 on, its tenth element lists the subcommands, each an entry of
    the same shape named "container|sub"."""
    if not isinstance(entries, list):
        raise ValueError(f"COMMAND did not reply with an array: {entries!r}")
    table: dict[str, frozenset[str]] = {}
    containers: set[str] = set()

    def add(entry: Reply) -> str:
        if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[2], list):
            raise ValueError(f"not a COMMAND entry: {entry!r}")
        name = text(entry[0]).upper()
        table[name] = frozenset(text(flag).lower() for flag in entry[2])
        return name

    for entry in entries:
        name = add(entry)
        assert isinstance(entry, list)
        subcommands = entry[9] if len(entry) > 9 else []
        if not isinstance(subcommands, list):
            raise ValueError(f"{name}: subcommands are not an array: {subcommands!r}")
        for sub in subcommands:
            sub_name = add(sub)
            if not sub_name.startswith(name + "|"):
                raise ValueError(f"{name}: subcommand {sub_name} is not named after it")
        if subcommands:
            containers.add(name)
    return table, frozenset(containers)


def name_set(variable: str, names: set[str] | frozenset[str], doc: str) -> str:
    lines = [f"#: {doc}", f"{variable}: frozenset[str] = frozenset("]
    if not names:
        return "\n".join(lines[:1] + [f"{variable}: frozenset[str] = frozenset()", ""])
    lines.append("    {")
    lines.extend(f'        "{name}",' for name in sorted(names))
    lines.append("    }")
    lines.append(")")
    lines.append("")
    return "\n".join(lines)


def render(version: str, table: dict[str, frozenset[str]], containers: frozenset[str]) -> str:
    read_only = {name for name, flags in table.items() if "readonly" in flags}
    for name in table:
        if not SAFE_NAME.fullmatch(name):
            raise ValueError(f"unexpected command name: {name!r}")
    if not SAFE_VERSION.fullmatch(version):
        raise ValueError(f"unexpected version: {version!r}")
    header = f'''\
# Generated by scripts/gen_commands.py from redis-server {version}: do not edit.
# Run `python3 scripts/gen_commands.py --help` to make it again.
"""The commands of redis-server {version}, as its COMMAND reply lists them.

Names are upper-case; a subcommand is named after its container, as in
"CONFIG|GET".  Commands and subcommands: {len(table)}; read-only: {len(read_only)};
containers: {len(containers)}.
"""

from __future__ import annotations

#: The version of the redis-server the table was read from (INFO server).
REDIS_VERSION = "{version}"
'''
    return (
        "\n".join(
            [
                header,
                name_set(
                    "READ_ONLY",
                    read_only,
                    "Every command whose flags include readonly (the server's own flag: "
                    "commands that\n#: touch no key, such as PING, INFO or CONFIG|GET, lack it).  "
                    "The only flag that makes\n#: a command safe to retry under "
                    'writes="at-most-once"; every other command needs\n#: an entry in '
                    "redis_backoff_c.writes.SAFE_TO_REPEAT, with its reason.",
                ),
                name_set("KNOWN", set(table), "Every command and subcommand the server reported."),
                name_set("CONTAINERS", containers, "The commands that have subcommands."),
            ]
        ).rstrip("\n")
        + "\n"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_server(executable: str, timeout: float = 10.0) -> Iterator[int]:
    """A redis-server with no persistence on a free loopback port; yields
    the port once the server answers PING, and stops it afterwards."""
    with tempfile.TemporaryDirectory(prefix="gen-commands-") as directory:
        port = free_port()
        process = subprocess.Popen(
            [
                executable,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                directory,
                "--logfile",
                "",
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client = Client(port, timeout=0.5)
                    try:
                        if client.call("PING") == "PONG":
                            break
                    finally:
                        client.close()
                except (OSError, RespError):
                    pass
                if process.poll() is not None:
                    raise RuntimeError(f"{executable} exited with status {process.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{executable} did not answer PING in {timeout} s")
                time.sleep(0.01)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def generate(port: int) -> str:
    client = Client(port)
    try:
        version = server_version(client)
        table, containers = command_table(client.call("COMMAND"))
    finally:
        client.close()
    return render(version, table, containers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write redis_backoff_c/_commands.py from a redis-server's COMMAND reply."
    )
    parser.add_argument(
        "--redis-server",
        metavar="PATH",
        default=None,
        help="the redis-server to start (default: redis-server on PATH)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="ask the server already listening on 127.0.0.1:PORT instead of starting one",
    )
    parser.add_argument(
        "--output",
        metavar="PATH",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"the module to write (default: {DEFAULT_OUTPUT.relative_to(REPO)}; '-': stdout)",
    )
    args = parser.parse_args(argv)
    if args.port is not None and args.redis_server is not None:
        parser.error("--port and --redis-server exclude each other")

    if args.port is not None:
        source = generate(args.port)
    else:
        executable = args.redis_server or shutil.which("redis-server")
        if executable is None:
            parser.error("no redis-server on PATH: give --redis-server PATH or --port PORT")
        with throwaway_server(executable) as port:
            source = generate(port)

    if str(args.output) == "-":
        sys.stdout.write(source)
    else:
        args.output.write_text(source)
        print(f"gen_commands.py: wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
