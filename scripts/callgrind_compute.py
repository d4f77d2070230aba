"""Instructions per call of each strategy's compute(3), and of the floors,
counted with callgrind: what the benchmark's floor rows time, without the
noise of a shared machine.

    python scripts/callgrind_compute.py [--calls N]

Run it with the interpreter to measure, with the package installed (for
example `.venv-3.13/bin/python -I scripts/callgrind_compute.py`; in the sid
root, `bash scripts/sid-root.sh -- /root/venvs/python3.14/bin/python -I
scripts/callgrind_compute.py` after scripts/test.sh made that venv).  Each
statement runs N times in the benchmark's shape (timeit's loop over
`f(3)`, `f` a bound method and a local) under `valgrind --tool=callgrind`,
and once with no calls; the difference over N is the figure.  The jittered
strategies are counted on both random sources.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from redis_backoff_c.bench._cases import JITTERED, STRATEGIES

CHILD = r"""
import random, sys, timeit
import redis_backoff_c
from redis_backoff_c import backoff
from redis_backoff_c.bench._cases import ARGS, FAILURES
kind, name, source, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
random.seed(1)
if source == "fast":
    redis_backoff_c.set_random_source("fast", seed=1)
if kind == "floor":
    f = (3).bit_length
    stmt = "f()"
elif kind == "random":
    f = random.random
    stmt = "f()"
elif kind == "floor1":
    f = ().count
    stmt = f"f({FAILURES})"
else:
    f = getattr(backoff, name)(*ARGS.get(name, ())).compute
    stmt = f"f({FAILURES})"
# The benchmark's shape (bench/_timing.py's stmt_side): timeit's loop, `f`
# one of its locals.
timer = timeit.Timer(stmt, "f = _ns['f']", globals={"_ns": {"f": f}})
timer.timeit(1000)  # warm up the specialising interpreter
timer.timeit(calls)
"""


def collected(args: list[str]) -> int:
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-I",
            "-c",
            CHILD,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if match is None:
        raise SystemExit(proc.stderr)
    return int(match.group(1))


def per_call(kind: str, name: str, source: str, calls: int) -> float:
    return (
        collected([kind, name, source, str(calls)]) - collected([kind, name, source, "0"])
    ) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--filter", default="", help="only strategies whose name contains this")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at once")
    args = parser.parse_args()
    runs = [("floor", "-", "python"), ("floor1", "-", "python"), ("random", "-", "python")]
    for name in STRATEGIES:
        if args.filter in name:
            sources = ("python", "fast") if name in JITTERED else ("python",)
            runs += [("strategy", name, source) for source in sources]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = list(pool.map(lambda run: per_call(*run, args.calls), runs))
    floor, random_call = counts[0], counts[2]
    print(f"CPython {sys.version.split()[0]}, {args.calls} calls, instructions per call")
    labels = {
        "floor": "floor: (3).bit_length()",
        "floor1": "one-argument floor: ().count(3)",
        "random": "random.random()",
    }
    for (kind, name, source), count in zip(runs, counts):
        label = labels.get(kind) or f"{name}.compute(3)" + (
            f" [{source}]" if name in JITTERED else ""
        )
        line = f"  {label:50} {count:7.1f}  {count / floor:5.2f}x floor"
        if source == "python" and name in JITTERED:
            line += f", above random.random() {(count - random_call) / floor:5.2f}x"
        print(line)


if __name__ == "__main__":
    main()
