"""Reference-leak hunt over test modules, in the manner of CPython's
``python -m test -R 3:3``: each module runs in this one process again and
again; after the warm-up runs, the interpreter's total reference count and
its count of allocated memory blocks must not grow from run to run.

    python scripts/refleak.py [--warmups N] [--runs N] [--threshold N] TEST_MODULE...

Needs a debug build of CPython (``sys.gettotalrefcount``: Debian's
``python3.14d``).  A module leaks when every measured run left at least
``--threshold`` more references (or blocks) than the run before, as
CPython's regrtest judges with a threshold of 1: pytest itself keeps a few
dozen at most from run to run, and not in every run, where a module whose
tests leak one object each leaks hundreds every run.  The figures of every
run are printed either way.  Exit status 1 on a leak, 2 on a test failure
or a wrong interpreter.

Runs with the hypothesis database off (a database grows by design) and
pytest's cache off.  The first runs fill the caches that a process keeps
for good (imports, interned strings, type caches, hypothesis' strategies,
pytest's assertion rewriting), which is why they are not measured.
"""

from __future__ import annotations

import argparse
import gc
import sys

import pytest


def settle() -> tuple[int, int]:
    gc.collect()
    gc.collect()
    return sys.gettotalrefcount(), sys.getallocatedblocks()  # type: ignore[attr-defined]


def run_once(module: str) -> int:
    return int(
        pytest.main(
            [
                module,
                "-q",
                "-x",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "--no-header",
                "--no-summary",
                "--hypothesis-profile=refleak",
            ]
        )
    )


def hunt(module: str, warmups: int, runs: int, threshold: int) -> bool:
    """True when `module` leaks; exits with 2 when it fails."""
    before = None
    ref_deltas, block_deltas = [], []
    for index in range(warmups + runs):
        status = run_once(module)
        if status != 0:
            print(f"refleak: {module} failed (pytest exit status {status})", flush=True)
            sys.exit(2)
        now = settle()
        if before is not None and index >= warmups:
            ref_deltas.append(now[0] - before[0])
            block_deltas.append(now[1] - before[1])
        before = now
    refs_leak = all(delta >= threshold for delta in ref_deltas)
    blocks_leak = all(delta >= threshold for delta in block_deltas)
    verdict = "LEAKS" if refs_leak or blocks_leak else "ok"
    print(
        f"refleak: {module}: references {ref_deltas}, blocks {block_deltas}: {verdict}",
        flush=True,
    )
    return refs_leak or blocks_leak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threshold", type=int, default=10)
    parser.add_argument("modules", nargs="+")
    args = parser.parse_args()
    if not hasattr(sys, "gettotalrefcount"):
        print("refleak: needs a debug build of CPython (sys.gettotalrefcount)", file=sys.stderr)
        return 2
    from hypothesis import settings

    settings.register_profile("refleak", database=None)
    leaks = [
        module for module in args.modules if hunt(module, args.warmups, args.runs, args.threshold)
    ]
    if leaks:
        print(f"refleak: leaks in {', '.join(leaks)}", flush=True)
        return 1
    print(f"refleak: no leak in {len(args.modules)} modules", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
