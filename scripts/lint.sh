#!/usr/bin/env bash
# Lint and type checks: ruff (Python style), clang-format (C style), the C
# layers (scripts/check_layers.py),
# mypy --strict (the stubs and a sample program using them), and stubtest
# (the stubs against the installed extension).
#
#   bash scripts/lint.sh
#
# PYTHON and VENV as for scripts/test.sh (default VENV: .venv-lint).
# clang-format comes from the system (Debian: apt-get install clang-format).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$repo/.venv-lint}

say() { printf 'lint.sh: %s\n' "$*" >&2; }
failed=()

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check '.[dev]'

say "ruff check / ruff format --check"
"$py" -m ruff check . || failed+=("ruff check")
"$py" -m ruff format --check . || failed+=("ruff format")

say "clang-format --dry-run -Werror"
if ! command -v clang-format >/dev/null 2>&1; then
    say "clang-format is not installed (Debian: apt-get install clang-format)"
    failed+=("clang-format missing")
else
    clang-format --dry-run -Werror csrc/*.c csrc/*.h || failed+=("clang-format")
fi

say "the C layers: no dependency cycle, no layer naming a higher one (scripts/check_layers.py)"
"$py" scripts/check_layers.py >/dev/null || failed+=("C layers")

say "mypy --strict: the package, its stubs, the pytest entry module and tests/typing/sample.py"
"$py" -m mypy --strict redis_backoff_c redis_backoff_c_pytest.py || failed+=("mypy redis_backoff_c")
# The sample is checked against the installed package, as a user's code is.
"$py" -m mypy --strict tests/typing/sample.py || failed+=("mypy sample")

# stubtest imports every module that has a stub; a module whose stub is
# written before its code (retry, asyncio.retry) is listed, not checked.
say "stubtest"
allow=$(mktemp)
# stubtest runs in an empty directory of its own, off the checkout (whose
# redis_backoff_c/ would shadow the installed build) and off the shared
# /tmp, where any stray sys.py or typing.py shadows the standard library
# ("This file shadows library module").
stubdir=$(mktemp -d)
trap 'rm -rf "$allow" "$stubdir"' EXIT
cp .ci/stubtest-allowlist.txt "$allow"
missing=$("$py" -I - <<'PY'
import importlib.util, pathlib, redis_backoff_c
root = pathlib.Path(redis_backoff_c.__file__).parent
for stub in sorted(root.rglob("*.pyi")):
    name = ".".join(("redis_backoff_c",) + stub.relative_to(root).with_suffix("").parts)
    if importlib.util.find_spec(name) is None:
        print(name)
PY
)
for m in $missing; do
    say "not checked by stubtest, no module yet: $m"
    printf '%s\n' "${m//./\\.}" >> "$allow"
done
(cd "$stubdir" && "$py" -m mypy.stubtest redis_backoff_c --allowlist "$allow" \
    --mypy-config-file "$repo/pyproject.toml") || failed+=("stubtest")

if [ ${#failed[@]} -gt 0 ]; then
    say "FAILED: ${failed[*]}"
    exit 1
fi
say "all lint and type checks passed"
