"""The per-version table (README, docs' performance page), from the benchmark's JSON files.

    python3 scripts/bench_matrix_table.py docs/bench-3.*.json
    python3 scripts/bench_matrix_table.py --full docs/bench.json


One column per CPython: each headline row's ratio (redis-py / C, median,
[interquartile range]), C against its floor timed in the same run for the
floor rows, and ns above unpatched redis-py for the cluster rows.  The last
lines name the lowest lower quartile of any ratio row and the rows that
missed their target, per version.  The targets, per version, are those of
docs/performance.md ("Against the targets").
"""

import json
import sys

HEADLINES = [
    ("asyncio `call_with_retry`, success", "async call_with_retry success"),
    ("its overhead above `await do()`", "  overhead above awaiting do() directly"),
    ("sync `call_with_retry`, success", "call_with_retry success (Retry(ExponentialBackoff(), 3))"),
    ("its overhead above `do()`", "  overhead above calling do() directly"),
    ("`Retry(ExponentialBackoff(), 3)`", "Retry(ExponentialBackoff(), 3)"),
    ("`Retry == Retry`", "Retry == Retry"),
    ("`hash(Retry)`", "hash(Retry)"),
    ("`copy.deepcopy(Retry(...))`", "copy.deepcopy(Retry(ExponentialBackoff(), 3))"),
    ("`ExponentialBackoff.compute(3)`", "ExponentialBackoff.compute(3)"),
    ("`ExponentialWithJitterBackoff.compute(3)`", "ExponentialWithJitterBackoff.compute(3)"),
    ("`ExponentialBackoff.compute(3)` / floor (C/floor)", "ExponentialBackoff.compute(3) vs floor"),
    (
        "`ExponentialWithJitterBackoff.compute(3)`, fast source / floor",
        "ExponentialWithJitterBackoff.compute(3) [fast] vs floor",
    ),
    (
        "sync success above `do()` / `d.get(do, fail)`",
        "call_with_retry success above do(), vs d.get(do, fail)",
    ),
    ("asyncio success / bare coroutine", "async call_with_retry success vs the bare async def"),
    (
        "asyncio success / coroutine with redis-py's signature",
        "async call_with_retry success vs the bare async def with redis-py's signature",
    ),
    (
        "RedisCluster command under `patch()`, no extras",
        "cluster command success, patched, no extras: ns above unpatched",
    ),
    (
        "RedisCluster command under `patch()`, budget + stats",
        "cluster command success, patched, budget + stats: ns above unpatched",
    ),
]


def cell(row):
    if row is None or not row.get("available", True) or row.get("value") is None:
        return "n/a"
    value = row["value"]
    if isinstance(value, str):
        # "inf": the C side's overhead measured below zero (within noise).
        return f"{value}x"
    if row.get("kind") == "delta":
        return f"{value:+.1f} ns" + (" MISS" if row.get("verdict") == "MISS" else "")
    text = f"{value:.2f}x"
    if row.get("value_q1") is not None:
        text += f" [{row['value_q1']:.2f}-{row['value_q3']:.2f}]"
    return text


def lowest_quartile(data):
    worst = None
    for row in data["rows"]:
        if row.get("kind") != "ratio" or row.get("value_q1") is None:
            continue
        if row["section"] in ("end-to-end", "peers", "floor"):
            continue  # judged by their median / not a redis-py ratio
        if worst is None or row["value_q1"] < worst["value_q1"]:
            worst = row
    return worst


def main(paths):
    runs = []
    for path in paths:
        with open(path) as handle:
            data = json.load(handle)
        version = ".".join(data["meta"]["python"].split(".")[:2])
        runs.append((version, data))
    runs.sort(key=lambda run: tuple(int(p) for p in run[0].split(".")))
    header = "| operation | " + " | ".join(f"{v} ({d['meta']['python']})" for v, d in runs) + " |"
    print(header)
    print("|---|" + "---:|" * len(runs))
    for title, name in HEADLINES:
        cells = []
        for _, data in runs:
            rows = {row["name"]: row for row in data["rows"]}
            cells.append(cell(rows.get(name)))
        print(f"| {title} | " + " | ".join(cells) + " |")
    cells = []
    for _, data in runs:
        worst = lowest_quartile(data)
        cells.append(
            "n/a" if worst is None else f"{worst['value_q1']:.2f}x ({worst['name'].strip()})"
        )
    print("| lowest lower quartile, any ratio row | " + " | ".join(cells) + " |")
    print()
    for version, data in runs:
        missed = [
            r["name"].strip() for r in data["rows"] if (r.get("verdict") or "").startswith("MISS")
        ]
        print(f"{version}: {len(missed)} MISS" + (": " + "; ".join(missed) if missed else ""))
    meta = runs[0][1]["meta"]
    # redis-py 8.2 needs Python 3.11+, so the versions may differ per column.
    redis_versions = ", ".join(f"{v}: {d['meta']['packages'].get('redis')}" for v, d in runs)
    print(
        f"machine: {meta['cpu']} ({meta['cpu_count']} CPUs), {meta['platform']}; "
        f"redis-py {redis_versions}; profile {meta['settings']['profile']}, "
        f"clock {meta['settings']['clock']}"
    )


def _amount(value, unit):
    if value is None:
        return ""
    if unit == "B":
        return f"{value:.0f} B"
    if value >= 1000:
        return f"{value / 1000:.3g} us"
    return f"{value:.1f} ns"


def full_table(data):
    """Every row of one run, as a Markdown table (the docs' full profile),
    then the run's machine and settings."""
    lines = [
        "| section | row | redis-py (or reference) | C | value [IQR] | target | verdict |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in data["rows"]:
        if not row.get("available", True):
            value = f"n/a: {row.get('reason')}"
        elif row.get("value") is None:
            value = ""
        elif row["kind"] == "delta":
            value = f"{row['value']:+.1f} ns"
        else:
            value = f"{row['value']:.2f}x"
            if row.get("value_q1") is not None:
                value += f" [{row['value_q1']:.2f}-{row['value_q3']:.2f}]"
        target = ""
        if row.get("target") is not None:
            op = "≥" if row["target_op"] == ">=" else "≤"
            target = f"{op} {row['target']:g}" + (" ns" if row["kind"] == "delta" else "x")
        name = row["name"].strip().replace("|", "\\|")
        cells = [
            row["section"],
            name,
            _amount(row.get("a"), row["unit"]),
            _amount(row.get("b"), row["unit"]),
            value,
            target,
            row.get("verdict") or "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    meta = data["meta"]
    lines.append("")
    lines.append(
        f"CPython {meta['python']}, redis-py {meta['packages'].get('redis')}, "
        f"{meta['cpu']} ({meta['cpu_count']} CPUs), {meta['platform']}; profile "
        f"{meta['settings']['profile']}, clock {meta['settings']['clock']}, "
        f"{meta['duration_seconds']:.0f} s, run on {meta['date']}."
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--full"]:
        with open(sys.argv[2]) as handle:
            print(full_table(json.load(handle)), end="")
    else:
        main(sys.argv[1:])
