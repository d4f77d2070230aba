#!/usr/bin/env bash
# redis-py's own tests, run twice against local servers: as redis-py ships
# them, and with redis_backoff_c.patch() applied by the package's own pytest
# switch, `pytest --redis-backoff-c` (redis_backoff_c/pytest_plugin.py), as a
# user would run their suite. The stage fails if any test passes without
# patch() and does not pass with it, or if a patched run does not report the
# C types in use for its whole session.
#
#   bash .ci/redis-py-suite.sh
#
# PYTHON  interpreter for the suite's virtualenv (default: python3)
# VENV    that virtualenv (default: .venv-redis-suite); it gets this package
#         and the test dependencies redis-py's tests import (pytest,
#         pytest-asyncio, pytest-timeout, packaging), from PyPI.
#
# The tests come from the sdist of the installed redis-py version, fetched
# at run time with `pip download --no-binary :all:` into a temporary
# directory: nothing of redis-py is copied into this repository. Only
# tests/ and pyproject.toml (its pytest settings) are unpacked, so the tests
# import the installed redis, the one patch() changes.
#
# What runs, and why the rest does not:
# - tests/test_retry.py, tests/test_backoff.py, tests/test_asyncio/test_retry.py:
#   the retry and backoff tests;
# - tests/test_connection.py, tests/test_connection_pool.py and their asyncio
#   twins: every connection deep-copies its Retry and retries through it;
# - tests/test_cluster.py, tests/test_asyncio/test_cluster.py, against a
#   6-node cluster on 16379-16384 (the ports those tests hard-code), started
#   by tests/integration/topology.py.
#   with tests/test_cluster_transaction.py and its asyncio twin; a subset,
#   see cluster_tests below.
# Not run: TLS tests (they need the certificates and TLS ports of redis-py's
# docker setup: no server answers, so they fail or skip alike in both runs),
# Redis Stack modules (JSON, search, ...: Debian's redis-server has none),
# Sentinel tests (they expect redis-py's docker sentinels), everything else
# (commands, pubsub, ...: no retry machinery beyond what the files above
# drive). Tests gated on a newer server than Debian's (skip_if_server_version_lt)
# skip in both runs; the counts below say how many.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv-redis-suite}
say() { printf 'redis-py-suite: %s\n' "$*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/redis-py-suite.XXXXXX")
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

t0=$SECONDS
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
py=$VENV/bin/python
rm -rf build
REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 "$py" -m pip install --quiet --disable-pip-version-check . pytest pytest-asyncio pytest-timeout packaging
version=$("$py" -c 'import importlib.metadata as m; print(m.version("redis"))')
say "redis-py $version; virtualenv ready in $((SECONDS - t0))s"

# The sdist only, and its build backend (hatchling, needed to read the
# sdist's metadata) as wheels: built from source too, they take minutes.
t0=$SECONDS
"$py" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    --only-binary hatchling,packaging,pathspec,pluggy,trove-classifiers,tomlkit \
    -d "$work/sdist" "redis==$version"
tar -xzf "$work/sdist/redis-$version.tar.gz" -C "$work" \
    "redis-$version/tests" "redis-$version/pyproject.toml"
suite=$work/redis-$version
say "sdist fetched and unpacked in $((SECONDS - t0))s"

# Servers: one standalone redis-server, on 6379 when it is free (a few of
# redis-py's tests hard-code it), and the cluster.
port=6379
if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    say "6379 is taken: the standalone server is on $port, and the tests that hard-code 6379 fail in both runs"
fi
mkdir -p "$work/standalone"
redis-server --port "$port" --bind 127.0.0.1 --dir "$work/standalone" --save "" \
    --appendonly no --protected-mode no --daemonize no --logfile "$work/standalone/redis.log" \
    --enable-debug-command yes &
pids+=($!)
"$py" tests/integration/topology.py cluster --ports 16379-16384 --dir "$work/cluster" \
    >"$work/cluster.out" 2>&1 </dev/null &
pids+=($!)
for _ in $(seq 600); do
    grep -qx ready "$work/cluster.out" && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
done
if ! grep -qx ready "$work/cluster.out"; then
    say "the cluster on 16379-16384 did not start:"
    cat "$work/cluster.out" >&2
    exit 1
fi
for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done

standalone_tests=(
    tests/test_retry.py tests/test_backoff.py tests/test_asyncio/test_retry.py
    tests/test_connection.py tests/test_connection_pool.py
    tests/test_asyncio/test_connection.py tests/test_asyncio/test_connection_pool.py
)
# The cluster tests where the cluster's Retry is read, copied, updated and
# run: the transaction tests (redis-py 8.1 runs call_with_retry there), the
# connection-error and node-manager tests, and every test named for retry
# or reinitialize. Left out, for time (all of test_cluster.py and its
# asyncio twin take over 15 minutes here): the command tests
# (TestClusterRedisCommands, several hundred, which exercise commands, not
# retries, many depending on the server version), pipeline, pubsub,
# monitor, TLS, load-balancing (mock servers, slow) and metrics recorders.
cluster_tests=(
    tests/test_cluster.py tests/test_asyncio/test_cluster.py
    tests/test_cluster_transaction.py tests/test_asyncio/test_cluster_transaction.py
    -k "TestClusterTransaction or TestClusterConnectionErrorHandling or TestNodesManager or TestClusterNodeConnectionHandling or retry or Retry or reinitialize"
)

# run NAME URL PLUGIN_ARGS... -- TESTS...: one pytest run, its outcomes in
# $work/NAME.xml. Failing tests are the point of the comparison, not an error.
run() {
    local name=$1 url=$2
    shift 2
    local plugin=()
    while [ "$1" != -- ]; do
        plugin+=("$1")
        shift
    done
    shift
    local t=$SECONDS
    (cd "$suite" && "$py" -m pytest -q -p no:cacheprovider \
        -o addopts= -o log_cli=false "${plugin[@]}" --redis-url="$url" \
        --junitxml="$work/$name.xml" "$@" >"$work/$name.log" 2>&1) || true
    say "$name: $(tail -n 1 "$work/$name.log") ($((SECONDS - t))s)"
    if ! tail -n 1 "$work/$name.log" | grep -q passed; then
        tail -n 40 "$work/$name.log" >&2
    fi
}

# Each plain run beside the other kind's patched run: two cores, and never
# two runs on one server (the tests flush it).
t0=$SECONDS
run standalone-plain "redis://127.0.0.1:$port/0" -- "${standalone_tests[@]}" &
beside=$!
run cluster-patched "redis://127.0.0.1:16379/0" --redis-backoff-c -- "${cluster_tests[@]}"
wait "$beside"
run standalone-patched "redis://127.0.0.1:$port/0" --redis-backoff-c -- "${standalone_tests[@]}" &
beside=$!
run cluster-plain "redis://127.0.0.1:16379/0" -- "${cluster_tests[@]}"
wait "$beside"
say "four runs in $((SECONDS - t0))s"

# The plugin's verdict, at the end of each run: the C types in use for the
# whole session (an unpatch() during the run, or no extension, says NOT).
for name in standalone cluster; do
    verdict=$(grep -m1 "^redis_backoff_c: the C types were" "$work/$name-patched.log" || true)
    say "$name-patched: ${verdict:-no verdict from the plugin}"
    if [ "$verdict" != "redis_backoff_c: the C types were in use for the whole session" ]; then
        grep "^redis_backoff_c:" "$work/$name-patched.log" >&2 || true
        exit 1
    fi
    if grep -q "^redis_backoff_c:" "$work/$name-plain.log"; then
        say "$name-plain: the plugin reported in a run without --redis-backoff-c"
        exit 1
    fi
done

"$py" - "$work" <<'PY'
"""Compare each pair of runs test by test."""
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

work = Path(sys.argv[1])


def outcomes(name):
    result = {}
    for case in ET.parse(work / f"{name}.xml").iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "error" in kinds:
            result[test] = "error"
        elif "failure" in kinds:
            result[test] = "failed"
        elif "skipped" in kinds:
            result[test] = "skipped"
        else:
            result[test] = "passed"
    return result


broken = []
for pair in ("standalone", "cluster"):
    plain, patched = outcomes(f"{pair}-plain"), outcomes(f"{pair}-patched")
    print(f"{pair}: without patch() {dict(sorted(Counter(plain.values()).items()))}")
    print(f"{pair}: with patch()    {dict(sorted(Counter(patched.values()).items()))}")
    for test, outcome in sorted(plain.items()):
        if outcome == "passed" and patched.get(test) != "passed":
            broken.append(f"{test}: passed without patch(), {patched.get(test, 'missing')} with it")
    for test in sorted(set(patched) - set(plain)):
        if patched[test] != "passed":
            broken.append(f"{test}: only in the patched run, {patched[test]}")
    changed = sum(1 for t in plain if patched.get(t) != plain[t])
    print(f"{pair}: {len(plain)} tests, {changed} with another outcome under patch()")
if broken:
    print("redis-py-suite: FAILED: tests that pass without patch() and not with it:")
    print("\n".join(broken))
    sys.exit(1)
print("redis-py-suite: every test that passes without patch() passes with it")
PY
