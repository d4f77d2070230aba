#!/usr/bin/env bash
# valgrind memcheck over the core tests, against a debug-friendly build of
# the extension (-O0 -g).  Fails on any memcheck error or "definitely lost"
# block whose stack goes through our code (a frame in _speedups*.so, shown
# with its csrc/ file: --fullpath-after= prints whole source paths).
#
#   bash scripts/valgrind.sh [pytest arguments...]   (default: the core tests)
#
# PYTHON  the interpreter (default: python3 on PATH)
# VENV    the virtualenv to use or create (default: .venv-valgrind)
#
# Slow (the interpreter runs some 30 to 50 times slower under memcheck): a
# few minutes for the core tests on two cores, which is why CI does not run
# it (CI runs scripts/sanitize.sh, the whole suite under ASan + UBSan, and
# the leak tests are in the normal suite).  See docs/hardening.md.
#
# Choices:
# - PYTHONMALLOC=malloc: every object comes from malloc, so memcheck sees
#   each one (pymalloc's arenas would hide them, and its reads of
#   uninitialised arena memory are noise).
# - --leak-check=full, judged on "definitely lost" only: CPython keeps much
#   memory reachable at exit on purpose (interned strings, static types,
#   module state), and "possibly lost" is what its object layouts (pointers
#   into the middle of blocks) look like to valgrind.
# - scripts/valgrind-python.supp: CPython's own known noise, which the
#   interpreter's start-up and shutdown produce whatever the extension
#   does; nothing there names our code.
# - A report counts when our extension is at the top of its stack (among the
#   first 3 frames of an error, the first 8 of a leaked block's allocation):
#   a report inside the interpreter, redis-py or the standard library (for
#   instance a garbage collection that merely started during our module's
#   initialisation) is counted and listed, not judged.
#
# Root on Debian: installs valgrind via apt-get when missing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv-valgrind}

say() { printf 'valgrind.sh: %s\n' "$*" >&2; }

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing valgrind with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq valgrind >/dev/null
    else
        say "valgrind is needed (Debian: apt-get install valgrind)"
        exit 1
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/src"
mkdir -p "$src"
# The sources as they are in the work tree, without any build product: the
# debug build never lands in build/ or redis_backoff_c/.
tar -C "$repo" --exclude='*.so' --exclude='*.o' --exclude='__pycache__' \
    -cf - pyproject.toml setup.py MANIFEST.in README.md LICENSE csrc redis_backoff_c | tar -C "$src" -xf -

say "building the extension with -O0 -g into $VENV"
export REDIS_BACKOFF_C_CFLAGS="-O0 -g -fno-omit-frame-pointer -Werror"
"$py" -m pip uninstall --quiet --yes redis-backoff-c >/dev/null 2>&1 || true
"$py" -m pip install --quiet --disable-pip-version-check "$src[test]"

if [ $# -eq 0 ]; then
    # The core tests: every strategy and sync Retry behaviour, the asyncio
    # awaitable's protocol, the reentrancy and GC cases; not the
    # hypothesis-heavy, thread, leak-counting or timing ones (Ctrl-C must
    # interrupt a sleep within 10 s: signal delivery under memcheck is
    # slower than that on a loaded machine).
    set -- -q -p no:cacheprovider -k "not ctrl_c" \
        tests/contract/test_backoff.py tests/c_only/test_backoff_improvements.py \
        tests/contract/test_retry.py tests/c_only/test_retry_improvements.py tests/contract/test_reentrancy.py \
        tests/c_only/test_gc.py tests/c_only/test_random_source.py tests/contract/test_async_retry_protocol.py
fi

log="$work/memcheck.log"
say "running pytest $* under valgrind memcheck (slow)"
# bin/pytest: the checkout's redis_backoff_c/ stays off sys.path (see
# scripts/sanitize.sh).
status=0
PYTHONMALLOC=malloc REDIS_BACKOFF_C_EXPECT_INSTALLED=1 \
    valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --num-callers=40 --track-origins=no --fullpath-after= \
    --suppressions="$repo/scripts/valgrind-python.supp" --log-file="$log" \
    "$py" "$VENV/bin/pytest" "$@" || status=$?

# valgrind's records: blocks of lines starting "==PID== " separated by an
# empty one. Keep those that are errors or definite leaks, and judge each
# by whether a frame is in our extension.
verdict=0
"$py" - "$log" >"$work/verdict" <<'PY' || verdict=$?
import re
import sys

text = open(sys.argv[1]).read()
records, current = [], []
for line in text.splitlines():
    body = re.sub(r"^==\d+== ?", "", line)
    if body.strip():
        current.append(body)
    elif current:
        records.append(current)
        current = []
if current:
    records.append(current)

ours, theirs, summary = [], [], []
for record in records:
    head = record[0]
    if head.startswith(("HEAP SUMMARY", "LEAK SUMMARY", "ERROR SUMMARY")) or "definitely lost:" in head:
        summary.append("\n".join(record))
        continue
    is_leak = "definitely lost" in head
    is_error = bool(re.match(r"(Invalid|Conditional jump|Use of uninitialised|Syscall param|"
                             r"Mismatched free|Source and destination overlap|Argument)", head))
    if not (is_leak or is_error):
        continue
    # Ours when our code is at the top of the stack: among the first 3
    # frames of an error (a garbage collection that merely started inside
    # our code, and trips over the interpreter's own values, is not ours;
    # our tp_traverse would be the second frame), among the first 8 of a
    # leaked block's allocation (past malloc and the allocator's layers).
    frames = [f for f in record[1:] if re.match(r"\s*(at|by) 0x", f)]
    depth = 8 if is_leak else 3
    mine = any(re.search(r"_speedups|/csrc/", f) for f in frames[:depth])
    (ours if mine else theirs).append("\n".join(record))

print(f"records in our code: {len(ours)}")
print(f"records elsewhere (interpreter, libraries; not judged): {len(theirs)}")
for record in ours:
    print("\n" + record)
print("\n".join(s for s in summary if "LEAK SUMMARY" in s or "ERROR SUMMARY" in s))
sys.exit(1 if ours else 0)
PY
cat "$work/verdict" >&2
if [ -n "${VALGRIND_LOG:-}" ]; then
    cp "$log" "$VALGRIND_LOG"
    say "full memcheck log copied to $VALGRIND_LOG"
fi
if [ "$verdict" -ne 0 ]; then
    say "FAILED: memcheck reported errors or definite leaks in our code (above)"
    exit 1
fi
if [ "$status" -ne 0 ]; then
    say "FAILED: pytest exited with $status under valgrind"
    exit "$status"
fi
say "no memcheck error and no definite leak in our code; tests passed"
