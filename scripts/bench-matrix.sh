#!/usr/bin/env bash
# The benchmark on every supported CPython installed here, one after the
# other, each into bench-3.X.json, then the per-version table of the
# headline rows (the docs' performance page and the README show it).
#
#   bash scripts/bench-matrix.sh [benchmark arguments...]
#   bash scripts/bench-matrix.sh --quick --no-e2e     # a minute per version
#   OUT=docs bash scripts/bench-matrix.sh --quick --no-e2e   # update the docs' figures
#   bash scripts/bench-matrix.sh --where              # say where it would write, and stop
#
# Interpreters: $PYTHONS (space-separated paths) if set, else every
# python3.10 - python3.15 found under $(pyenv root)/versions, else on PATH.
# CPython 3.14 and 3.15 live in the Debian sid root of scripts/sid-root.sh,
# where they are on PATH (its environment keeps only the variables the
# project's scripts name, so OUT goes in through env):
#   bash scripts/sid-root.sh --writable-repo -- env OUT=docs bash scripts/bench-matrix.sh --quick --no-e2e
# Each gets its own virtualenv, .venv-bench-3.X, with a real (non-editable)
# install of the package and its bench extra.  The benchmark runs with
# `python -I` from a scratch directory, so it times the installed build.
# OUT is where the JSON files go: bench-results/ in the repository by
# default (not tracked); the files under docs/ (docs/bench-3.X.json, which
# the docs build renders) change only when asked, with OUT=docs.
# VENV_PREFIX (default .venv-bench-) names the virtualenvs, in the repository
# unless it is an absolute path; VENV_PREFIX=.venv- reuses those of
# scripts/test.sh runs made with VENV=.venv-3.X.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/bench-results}
case "$OUT" in /*) ;; *) OUT="$repo/$OUT" ;; esac
VENV_PREFIX=${VENV_PREFIX:-.venv-bench-}
say() { printf 'bench-matrix: %s\n' "$*" >&2; }
if [ "${1:-}" = --where ]; then
    echo "$OUT"
    exit 0
fi

find_pythons() {
    if [ -n "${PYTHONS:-}" ]; then
        printf '%s\n' $PYTHONS
        return
    fi
    local root
    root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
    local minor found
    for minor in 10 11 12 13 14 15; do
        found=$(ls -d "$root"/versions/3."$minor".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
        if [ -z "$found" ]; then
            found=$(command -v "python3.$minor" || true)
        fi
        if [ -n "$found" ]; then
            echo "$found"
        else
            say "no CPython 3.$minor found: skipped"
        fi
    done
}

mapfile -t pythons < <(find_pythons)
if [ "${#pythons[@]}" -eq 0 ]; then
    say "no supported CPython (3.10 - 3.15) found"
    exit 1
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$OUT"
written=()
for python in "${pythons[@]}"; do
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    case "$VENV_PREFIX" in
    /*) venv="$VENV_PREFIX$version" ;;
    *) venv="$repo/$VENV_PREFIX$version" ;;
    esac
    want=$("$python" -c 'import sys; print(sys.base_prefix, sys.version)')
    if [ ! -x "$venv/bin/python" ] || [ "$("$venv/bin/python" -c 'import sys; print(sys.base_prefix, sys.version)' 2>/dev/null)" != "$want" ]; then
        say "creating $venv with $("$python" -V 2>&1)"
        "$python" -m venv --clear "$venv"
    fi
    say "installing the package into $venv"
    rm -rf build
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check '.[bench]'
    json="$OUT/bench-$version.json"
    say "CPython $version: python -m redis_backoff_c.bench $* --json $json"
    (cd "$scratch" && "$venv/bin/python" -I -m redis_backoff_c.bench "$@" --json "$json")
    written+=("$json")
done
# The last interpreter's venv runs the table (the sid root has no python3).
"$venv/bin/python" "$repo/scripts/bench_matrix_table.py" "${written[@]}"
