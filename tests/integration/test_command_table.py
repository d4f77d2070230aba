"""The committed command table (redis_backoff_c/_commands.py) against the
COMMAND reply of a real redis-server.

The table is generated from one server version (REDIS_VERSION); the suite
runs against whatever redis-server is on PATH.  Whatever the version, every
command both sides know must agree on being read-only (and on having
subcommands); when the versions are the same, the two must list the same
commands, and scripts/gen_commands.py must write the committed file again
byte for byte.  Against another version the test prints how many commands
each side has that the other lacks (`pytest -s`, or -rP, shows it).

redis-server 7.0.15 (Debian 12) and 8.0.6 (Debian sid) were compared when
the table was first generated: of the 366 commands and subcommands both
know, none has a different readonly flag, so there is no exception to
accept here.  8.0.6 has 28 that 7.0.15 lacks (the hash field expiry
commands, the vector set commands, CLIENT|NO-TOUCH, CLIENT|SETINFO,
CLUSTER|MYSHARDID, WAITAOF), and none the other way.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from incr_stream import redis_server as redis_server  # the fixture

from redis_backoff_c import _commands

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "gen_commands.py"


def server_commands(port):
    """{NAME: flags} for every command and subcommand the server reports,
    and the names of those that have subcommands: read from the raw COMMAND
    reply, without redis-py's reply callback."""
    connection = redis.Connection(host="127.0.0.1", port=port, decode_responses=True)
    try:
        connection.send_command("COMMAND")
        entries = connection.read_response()
    finally:
        connection.disconnect()
    flags = {}
    containers = set()
    for entry in entries:
        name = entry[0].upper()
        flags[name] = set(entry[2])
        subcommands = entry[9] if len(entry) > 9 else []
        for sub in subcommands:
            flags[sub[0].upper()] = set(sub[2])
        if subcommands:
            containers.add(name)
    return flags, containers


def server_version(port):
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        return client.info("server")["redis_version"]
    finally:
        client.close()


def test_table_is_consistent():
    assert _commands.READ_ONLY <= _commands.KNOWN
    assert _commands.CONTAINERS <= _commands.KNOWN
    for name in _commands.KNOWN:
        assert name == name.upper()
        container, bar, sub = name.partition("|")
        if bar:
            assert sub and "|" not in sub, name
            assert container in _commands.CONTAINERS, name
    for container in _commands.CONTAINERS:
        assert any(name.startswith(container + "|") for name in _commands.KNOWN), container
    # A few that the at-most-once policy will lean on, by name.  The
    # readonly flag means "reads the keyspace only": commands that touch no
    # key (PING, INFO, CONFIG GET, CLIENT LIST) do not have it.
    assert {"GET", "MGET", "EXISTS", "OBJECT|ENCODING", "XINFO|STREAM"} <= _commands.READ_ONLY
    assert {"SET", "INCR", "CONFIG|SET", "EXEC", "EVAL"}.isdisjoint(_commands.READ_ONLY)
    assert {"PING", "INFO", "CONFIG|GET", "CLIENT|LIST"}.isdisjoint(_commands.READ_ONLY)
    assert {"CONFIG", "CLIENT", "OBJECT", "XINFO"} <= _commands.CONTAINERS


def test_table_agrees_with_the_server(redis_server):
    flags, containers = server_commands(redis_server.port)
    version = server_version(redis_server.port)
    known = set(flags)

    common = known & _commands.KNOWN
    assert common, "the server and the table share no command"
    # No exception: 7.0.15 and 8.0.6 agree on every command they share.
    read_only_disagrees = sorted(
        name for name in common if ("readonly" in flags[name]) != (name in _commands.READ_ONLY)
    )
    assert read_only_disagrees == []
    container_disagrees = sorted(
        name for name in common if (name in containers) != (name in _commands.CONTAINERS)
    )
    assert container_disagrees == []

    only_server = sorted(known - _commands.KNOWN)
    only_table = sorted(_commands.KNOWN - known)
    print(
        f"\nredis-server {version}: {len(known)} commands and subcommands; the table "
        f"(from {_commands.REDIS_VERSION}): {len(_commands.KNOWN)}; in common: {len(common)}; "
        f"only the server has {len(only_server)}, only the table has {len(only_table)}"
    )
    if only_server:
        print(f"only the server: {' '.join(only_server)}")
    if only_table:
        print(f"only the table: {' '.join(only_table)}")
    if version == _commands.REDIS_VERSION:
        assert only_server == []
        assert only_table == []
        assert containers == _commands.CONTAINERS


def test_the_generator_renders_the_committed_table():
    """Whatever the server's version: scripts/gen_commands.py, given the
    committed table's own commands, writes the committed file again (its
    text, the rule in READ_ONLY's comment included, is the generator's)."""
    if not GENERATOR.is_file():
        pytest.skip(f"no {GENERATOR} (not run from a checkout)")
    render = runpy.run_path(str(GENERATOR))["render"]
    table = {
        name: frozenset({"readonly"} if name in _commands.READ_ONLY else ())
        for name in _commands.KNOWN
    }
    rendered = render(_commands.REDIS_VERSION, table, _commands.CONTAINERS)
    assert rendered == Path(_commands.__file__).read_text()


def test_generator_writes_the_committed_table(redis_server):
    """Against the very version the table came from, the generator's output
    is the committed file: nobody edited it by hand, and it is not stale."""
    version = server_version(redis_server.port)
    if version != _commands.REDIS_VERSION:
        pytest.skip(f"redis-server {version}, the table is from {_commands.REDIS_VERSION}")
    if not GENERATOR.is_file():
        pytest.skip(f"no {GENERATOR} (not run from a checkout)")
    generated = subprocess.run(
        [sys.executable, "-I", str(GENERATOR), "--port", str(redis_server.port), "--output", "-"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert generated == Path(_commands.__file__).read_text()


# ----------------------------------------------- the at-most-once policy's rule
#
# The server's readonly flag is the only one that makes a command safe to
# retry (writes.READ_ONLY); every other command safe to retry has an entry
# in writes.SAFE_TO_REPEAT, with its reason.  Checked here against the
# server the tests run: an entry the server lacks is allowed only when it
# runs another version than the table's, and the table has the command.


def known_to(flags, version, names):
    """The names the server knows; those it lacks must be the table's
    version's own (printed)."""
    missing = sorted(name for name in names if name not in flags)
    assert set(missing) <= _commands.KNOWN, missing
    if version == _commands.REDIS_VERSION:
        assert missing == []
    if missing:
        print(f"\nnot in redis-server {version}: {' '.join(missing)}")
    return [name for name in names if name in flags]


def test_read_only_is_the_servers_readonly_flag(redis_server, writes_table):
    flags, _ = server_commands(redis_server.port)
    version = server_version(redis_server.port)
    for name in known_to(flags, version, writes_table.READ_ONLY):
        assert "readonly" in flags[name], name
    # ... and every command the server flags readonly is retried.
    for name, command_flags in flags.items():
        if "readonly" in command_flags:
            assert writes_table.is_safe_to_repeat(tuple(name.split("|"))), name


def test_every_other_command_safe_to_retry_has_an_entry(redis_server, writes_table):
    writes = writes_table
    flags, _ = server_commands(redis_server.port)
    version = server_version(redis_server.port)
    writes.add_last_writer_wins()
    entries = writes._safe
    assert set(entries) <= _commands.KNOWN
    for name in known_to(flags, version, list(entries)):
        reason, when = entries[name]
        assert reason and "readonly" not in flags[name], name
        # A command the server flags write is listed only with a condition
        # that leaves its writing forms out, or by the program's choice.
        if "write" in flags[name]:
            assert when is not None or reason.startswith("last writer wins: "), name
    # The reads of the server's state: none carries the write flag.
    state_reads = [name for name, _, _ in writes._STATE_READS]
    for name in known_to(flags, version, state_reads):
        assert "write" not in flags[name], (name, flags[name])
    for name, _, _ in writes._SAME_AGAIN:
        assert "write" not in flags.get(name, ()), name
    for name, _, when in writes._READS_UNLESS_STORED:
        assert "write" in flags[name] and when is not None, name
    # Not repeated, whatever their flags: conditional writes, and WAIT.
    for name in ("EXPIREAT", "PEXPIREAT", "WAIT", "WAITAOF", "MSETNX", "SETNX", "GETSET"):
        assert name not in entries and name not in writes.READ_ONLY, name
