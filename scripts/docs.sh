#!/usr/bin/env bash
# The documentation site: a real install of the package with its docs extra,
# the HTML build (warnings are errors, nitpicky), then the doctest builder,
# which runs every code example of the site, against a redis-server this
# script starts on a free loopback port and stops.
#
#   bash scripts/docs.sh            # HTML in docs/_build/html
#
# PYTHON and VENV as for scripts/test.sh (default VENV: .venv-docs).
# redis-server must be on PATH (Debian: apt-get install redis-server).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv-docs}
say() { printf 'docs.sh: %s\n' "$*" >&2; }

if ! command -v redis-server >/dev/null 2>&1; then
    say "redis-server is needed for the examples (Debian: apt-get install redis-server)"
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"
say "installing the package and its docs extra into $VENV"
export REDIS_BACKOFF_C_REQUIRE_EXTENSION=${REDIS_BACKOFF_C_REQUIRE_EXTENSION:-1}
rm -rf build
"$py" -m pip install --quiet --disable-pip-version-check '.[docs]'

# A redis-server of our own, on a free loopback port, for the examples.
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
data=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$data" \
    --daemonize no >"$data/log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do
    if "$py" -c "import socket, sys; socket.create_connection(('127.0.0.1', $port), 0.2).close()" 2>/dev/null; then
        break
    fi
    sleep 0.05
done
export REDIS_PORT=$port

# From docs/ with -I: the installed package, never the checkout's
# redis_backoff_c/ (docs/conf.py refuses that too).
build="$repo/docs/_build"
say "HTML: sphinx-build -W --keep-going -n"
"$py" -I -m sphinx -b html -W --keep-going -n -q docs "$build/html"
say "doctest: every example of the site, redis-server on 127.0.0.1:$port"
"$py" -I -m sphinx -b doctest -W --keep-going -n -q docs "$build/doctest"
tail -n 4 "$build/doctest/output.txt" >&2
say "built $build/html/index.html"
