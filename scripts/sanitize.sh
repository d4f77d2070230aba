#!/usr/bin/env bash
# The whole test suite against an AddressSanitizer + UndefinedBehaviorSanitizer
# build of the extension.  Fails on any sanitizer report, and on any failing
# test.
#
#   bash scripts/sanitize.sh [pytest arguments...]
#
# PYTHON  the interpreter (default: python3 on PATH; CPython 3.10 or later)
# VENV    the virtualenv to use or create (default: .venv-sanitize)
#
# What it does, and why:
#
# - Builds with gcc: -fsanitize=address,undefined,float-cast-overflow
#   -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g, plus the
#   project's own flags and -Werror.  float-cast-overflow (a double too large
#   for the integer it is converted to) is undefined behaviour that gcc's
#   "undefined" group leaves out; float division by zero is left out on
#   purpose (IEEE 754 defines it, and the formulas rely on inf).
# - The build happens in a copy of the sources in a temporary directory and
#   is installed (non-editable) into its own virtualenv: no instrumented
#   object or .so is left in build/ or redis_backoff_c/, so the normal build is untouched.
# - The interpreter is not instrumented, so the ASan runtime must be the
#   first library loaded: LD_PRELOAD=libasan.so (gcc's).  libubsan comes in
#   as a dependency of the extension.
# - PYTHONMALLOC=malloc: every Python object, ours included, comes from
#   malloc, so ASan sees overflows and use-after-free on objects that
#   pymalloc would otherwise hide inside its own pools.
# - ASAN_OPTIONS detect_leaks=0: CPython does not free everything at exit
#   (interned strings, static types, module state of immortal modules) and
#   the interpreter is not instrumented, so LeakSanitizer's exit report is
#   CPython's noise, not ours.  Leaks are checked elsewhere: tests/c_only/test_leaks.py
#   (live objects and tracemalloc, in the normal suite) and scripts/valgrind.sh
#   ("definitely lost" blocks allocated from our code).
# - halt_on_error (ASan's default, and UBSan's through -fno-sanitize-recover)
#   stops the process at the first report, with exit codes of its own (ASan
#   87, UBSan 86).  This script fails on such an exit code, on any ASan
#   report file (ASan writes them to a log directory, so that a report from
#   a subprocess a test started, whose output the test captures, is not
#   lost), and on any report line in the output, whatever pytest's exit
#   status says.
# - The leak tests measure with tracemalloc here (pymalloc is off): slower,
#   and they warm up longer (see tests/leakcheck.py).
# - CPython is built with -fwrapv: signed overflow is defined behaviour in
#   the extension too, and UBSan does not report it.
#
# Root on Debian: installs gcc (with libasan/libubsan) via apt-get when
# missing.  Elsewhere: install gcc with its sanitizer runtimes yourself.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv-sanitize}
# A relative VENV is the checkout's (the script runs from there); made
# absolute, so that the check that the build landed in it compares like paths.
case "$VENV" in /*) ;; *) VENV="$repo/$VENV" ;; esac
CC=${CC:-gcc}

say() { printf 'sanitize.sh: %s\n' "$*" >&2; }

runtime_present() {
    command -v "$CC" >/dev/null 2>&1 || return 1
    local asan ubsan
    asan=$("$CC" -print-file-name=libasan.so)
    ubsan=$("$CC" -print-file-name=libubsan.so)
    [ -e "$asan" ] && [ -e "$ubsan" ]
}

if ! runtime_present; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing gcc and its sanitizer runtimes with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # gcc pulls in libasan and libubsan of its own version.
        apt-get install -y -qq gcc >/dev/null
    fi
    if ! runtime_present; then
        say "$CC with libasan.so and libubsan.so is needed (Debian: apt-get install gcc)"
        exit 1
    fi
fi
libasan=$(readlink -f "$("$CC" -print-file-name=libasan.so)")
# libstdc++ preloaded after it: a C++ library imported later (the benchmark's
# peers) throws exceptions, and ASan's __cxa_throw interceptor must find the
# real function when ASan starts, or it aborts with "CHECK failed:
# real___cxa_throw != 0".
libstdcxx=$(readlink -f "$("$CC" -print-file-name=libstdc++.so)")
preload="$libasan"
if [ -e "$libstdcxx" ]; then
    preload="$libasan:$libstdcxx"
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/src"
logs="$work/reports"
mkdir -p "$src" "$logs"
# The sources as they are in the work tree (uncommitted edits included),
# without any build product.
tar -C "$repo" --exclude='*.so' --exclude='*.o' --exclude='__pycache__' \
    -cf - pyproject.toml setup.py MANIFEST.in README.md LICENSE csrc redis_backoff_c \
    redis_backoff_c_pytest.py | tar -C "$src" -xf -

say "building the extension with ASan + UBSan ($CC) and installing it into $VENV"
export REDIS_BACKOFF_C_CFLAGS="-fsanitize=address,undefined,float-cast-overflow \
-fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g -Werror"
export REDIS_BACKOFF_C_LDFLAGS="-fsanitize=address,undefined,float-cast-overflow"
export CC
# Uninstall first so that pip always builds this copy (one build), and never
# takes a wheel from its cache.
"$py" -m pip uninstall --quiet --yes redis-backoff-c >/dev/null 2>&1 || true
"$py" -m pip install --quiet --disable-pip-version-check --no-cache-dir "$src[test]"
# Found without importing it (that needs the ASan runtime preloaded).
so=$("$py" -I -c '
import glob, importlib.util, os
package = os.path.dirname(importlib.util.find_spec("redis_backoff_c").origin)
print(*glob.glob(os.path.join(package, "_speedups*.so")))
')
case "$so" in
"$VENV"/*) ;;
*) say "the extension did not install into $VENV: $so"; exit 1 ;;
esac
# ldd's output is read whole before it is searched: under pipefail,
# `ldd | grep -q` fails whenever grep exits at its first match while ldd is
# still writing (SIGPIPE), which is how this check failed in CI with the
# sanitizer flags in the build.
deps=$(ldd "$so")
if ! grep -q libasan <<<"$deps"; then
    say "$so is not linked against libasan: the sanitizer flags did not reach the build"
    exit 1
fi

say "running the tests under ASan + UBSan with $("$py" -V 2>&1)"
# bin/pytest, not `python -m pytest`: the script's directory, not the
# checkout with its redis_backoff_c/, heads sys.path (python -I would also
# drop PYTHONMALLOC).
status=0
set +e
LD_PRELOAD="$preload" \
    PYTHONMALLOC=malloc \
    ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=87:detect_stack_use_after_return=1:log_path=$logs/asan" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86" \
    REDIS_BACKOFF_C_EXPECT_INSTALLED=1 \
    "$py" "$VENV/bin/pytest" -p no:cacheprovider --capture=sys "$@" 2>&1 | tee "$work/pytest.log"
status=${PIPESTATUS[0]}
set -e

# UBSan ignores log_path when it runs beside ASan in a process that was not
# linked with them (its report goes to stderr only), so pytest captures at
# the sys level only (--capture=sys: file descriptor 2 stays the terminal's,
# a report is not swallowed with a dying test's captured output), and the
# output is searched for report lines.
found=0
if grep -E 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)' \
    "$work/pytest.log" >"$work/lines"; then
    say "sanitizer report lines in the test output:"
    cat "$work/lines" >&2
    found=1
fi
reports=("$logs"/*)
if [ -e "${reports[0]}" ]; then
    say "ASan report files: ${#reports[@]}"
    for f in "${reports[@]}"; do
        printf '\n===== %s\n' "$(basename "$f")" >&2
        cat "$f" >&2
    done
    found=1
fi
case "$status" in
86) say "the test process exited with UBSan's exit code (86)"; found=1 ;;
87) say "the test process exited with ASan's exit code (87)"; found=1 ;;
esac
if [ "$found" -ne 0 ]; then
    say "FAILED: the sanitizers reported errors (above)"
    exit 1
fi
if [ "$status" -eq 5 ]; then
    say "pytest collected no tests: that is a failure"
    exit 1
fi
if [ "$status" -ne 0 ]; then
    say "FAILED: pytest exited with $status (no sanitizer report)"
    exit "$status"
fi
say "no sanitizer report; all tests passed"
