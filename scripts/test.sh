#!/usr/bin/env bash
# The whole test suite, from zero: redis-server, a virtualenv, a real
# (non-editable) install of the package, then pytest.
#
#   bash scripts/test.sh [pytest arguments...]
#
# PYTHON  the interpreter to test with (default: python3 on PATH)
# VENV    the virtualenv to use or create (default: .venv in the repository)
# REDIS_PY  a pip requirement for redis-py, installed after the package (for
#           example 'redis==8.1.0'; default: the newest release the package
#           allows, as a user gets it)
#
# The tests import the installed package from site-packages, never the
# checkout's redis_backoff_c/: `python -I` leaves the working directory off
# sys.path, and REDIS_BACKOFF_C_EXPECT_INSTALLED=1 makes a test check exactly
# that.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv}

say() { printf 'test.sh: %s\n' "$*" >&2; }

# redis-server for the integration tests (they start their own on loopback).
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing redis-server with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq redis-server >/dev/null
    else
        say "redis-server is needed and not installed."
        say "On Debian or Ubuntu: sudo apt-get install redis-server; elsewhere install Redis so that"
        say "'redis-server' is on PATH, then run this again."
        exit 1
    fi
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "no Python interpreter '$PYTHON': set PYTHON=/path/to/python3 (3.10 or later)"
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(not (sys.version_info >= (3, 10)))'; then
    say "$("$PYTHON" -V 2>&1) is too old: redis-backoff-c needs Python 3.10 or later"
    exit 1
fi

# A virtualenv for this interpreter: reused if it was made from the same one.
want=$("$PYTHON" -c 'import sys; print(sys.base_prefix, sys.version)')
if [ ! -x "$VENV/bin/python" ] || [ "$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix, sys.version)' 2>/dev/null)" != "$want" ]; then
    say "creating virtualenv $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv --clear "$VENV"
fi
py="$VENV/bin/python"

say "installing the package and its test dependencies into $VENV"
# The tests are of the C extension: a build that fails is an error here, not
# the pure-Python fallback that a plain `pip install` would settle for.
export REDIS_BACKOFF_C_REQUIRE_EXTENSION=${REDIS_BACKOFF_C_REQUIRE_EXTENSION:-1}
# pip builds in the tree; setuptools would reuse objects and files left in
# build/ by an earlier run, compiled with other flags or since deleted.
rm -rf build
"$py" -m pip install --quiet --disable-pip-version-check '.[test]'
if [ -n "${REDIS_PY:-}" ]; then
    say "installing $REDIS_PY"
    "$py" -m pip install --quiet --disable-pip-version-check "$REDIS_PY"
fi

say "running the tests with $("$py" -V 2>&1)"
status=0
REDIS_BACKOFF_C_EXPECT_INSTALLED=1 "$py" -I -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    say "pytest collected no tests: that is a failure"
    exit 1
fi
exit "$status"
