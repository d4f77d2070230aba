#!/usr/bin/env bash
# Packaging check: `python -m build` makes an sdist and then the wheel from
# that sdist (so the sdist builds from scratch); the sdist carries csrc/
# with its headers; the wheel carries the compiled extension and the type
# information; and a clean virtualenv installs the wheel and passes the test
# suite with every compiler replaced by a stub that fails and logs; without
# a compiler the sdist installs the pure-Python fallback, unless
# REDIS_BACKOFF_C_REQUIRE_EXTENSION=1.
#
#   bash .ci/check-wheel.sh        (PYTHON: the interpreter, default python3)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { printf 'check-wheel: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

"$PYTHON" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install --quiet --disable-pip-version-check build
say "python -m build (sdist, then the wheel from the sdist)"
"$work/build-env/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log"; fail "python -m build"; }

sdists=("$work"/dist/*.tar.gz)
wheels=("$work"/dist/*.whl)
[ ${#sdists[@]} -eq 1 ] && [ -f "${sdists[0]}" ] || fail "expected one sdist, got: ${sdists[*]}"
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || fail "expected one wheel, got: ${wheels[*]}"
say "sdist $(basename "${sdists[0]}"), wheel $(basename "${wheels[0]}")"

# The sdist: every tracked C source and header, the stubs, the tests.
tar -tzf "${sdists[0]}" | sed 's|^[^/]*/||' | sort >"$work/sdist.txt"
for f in $(git ls-files csrc redis_backoff_c tests scripts MANIFEST.in pyproject.toml setup.py LICENSE); do
    grep -qxF "$f" "$work/sdist.txt" || fail "sdist lacks $f"
done

# The wheel: the extension and the type information, no C sources.
"$work/build-env/bin/python" -m zipfile -l "${wheels[0]}" | awk 'NR>1 {print $1}' | sort >"$work/wheel.txt"
for f in redis_backoff_c/py.typed redis_backoff_c/_speedups.pyi redis_backoff_c/backoff.pyi \
         redis_backoff_c/retry.pyi redis_backoff_c/asyncio/retry.pyi; do
    grep -qxF "$f" "$work/wheel.txt" || fail "wheel lacks $f"
done
grep -q '^redis_backoff_c/_speedups\..*\.so$' "$work/wheel.txt" || fail "wheel lacks the extension"
if grep -q '\.c$' "$work/wheel.txt"; then fail "wheel carries C sources"; fi

# No compiler: stubs that log and fail stand first on PATH, CC and friends
# point at them, and pip may take binary distributions only.
mkdir "$work/nocc"
for cc in cc gcc c++ g++ clang clang++ ld x86_64-linux-gnu-gcc aarch64-linux-gnu-gcc; do
    printf '#!/bin/sh\necho "$0 $*" >>%q\nexit 1\n' "$work/compiler-calls.log" >"$work/nocc/$cc"
    chmod +x "$work/nocc/$cc"
done
nocc_env=(env "PATH=$work/nocc:$PATH" "CC=$work/nocc/cc" "CXX=$work/nocc/c++" "LDSHARED=$work/nocc/cc")

say "installing the wheel into a clean virtualenv, binaries only, no compiler"
"$PYTHON" -m venv "$work/clean"
"${nocc_env[@]}" "$work/clean/bin/python" -m pip install --quiet --disable-pip-version-check \
    --only-binary :all: "${wheels[0]}[test]"

say "running the test suite against the installed wheel"
status=0
"${nocc_env[@]}" REDIS_BACKOFF_C_EXPECT_INSTALLED=1 \
    "$work/clean/bin/python" -I -m pytest -p no:cacheprovider -q || status=$?
[ "$status" -ne 5 ] || fail "pytest collected no tests"
[ "$status" -eq 0 ] || fail "tests against the wheel (pytest exit $status)"
if [ -s "$work/compiler-calls.log" ]; then
    cat "$work/compiler-calls.log" >&2
    fail "a compiler was called"
fi
say "the wheel installs and passes the tests with no compiler"

# The sdist without a compiler: the extension is optional, so the install
# succeeds as the pure-Python fallback (one RuntimeWarning at import says
# why); with REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 the same install fails.
say "installing the sdist with no compiler: the pure-Python fallback"
"$PYTHON" -m venv "$work/fallback"
: >"$work/compiler-calls.log"
"${nocc_env[@]}" REDIS_BACKOFF_C_REQUIRE_EXTENSION=0 "$work/fallback/bin/python" -m pip install \
    --quiet --disable-pip-version-check --no-binary redis-backoff-c "${sdists[0]}" \
    || fail "the sdist did not install without a compiler"
[ -s "$work/compiler-calls.log" ] || fail "the build never tried the compiler"
fallback=$(cd "$work" && "$work/fallback/bin/python" -I -W error::RuntimeWarning -c '
import redis_backoff_c' 2>&1 || true)
case "$fallback" in
*"the C extension is not installed"*) ;;
*) fail "the fallback install did not warn as documented: $fallback" ;;
esac
implementation=$(cd "$work" && "$work/fallback/bin/python" -I -W ignore::RuntimeWarning -c '
import redis, redis_backoff_c
assert redis_backoff_c.Retry is redis.retry.Retry
print(redis_backoff_c.IMPLEMENTATION)')
[ "$implementation" = python ] || fail "the fallback install reports $implementation"
say "without a compiler the sdist installs the fallback: ${fallback##*$'\n'}"

say "the same with REDIS_BACKOFF_C_REQUIRE_EXTENSION=1: the install must fail"
"$PYTHON" -m venv "$work/required"
if "${nocc_env[@]}" REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 "$work/required/bin/python" -m pip install \
    --quiet --disable-pip-version-check --no-binary redis-backoff-c "${sdists[0]}" \
    >"$work/required.log" 2>&1; then
    fail "REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 did not make the failed build an error"
fi
say "REDIS_BACKOFF_C_REQUIRE_EXTENSION=1: the install failed, as it must"
